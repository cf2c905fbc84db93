"""Everything aipc-env learns about a machine: one model (model.py), the parsers of tool outputs
(parse.py) and the probes that read the machine (gather.py). Nothing else touches the machine."""

from aipc_env.facts.model import FACTS_SCHEMA_VERSION, Facts, load_facts

__all__ = ["FACTS_SCHEMA_VERSION", "Facts", "load_facts"]
