"""Everything that runs inside the training env: the only folder whose modules may import torch, diffusers, peft,
bitsandbytes, accelerate or transformers. The environment side starts these modules as processes (launch/hops.py
names them) and reads back their JSON results; it never imports them (tests/test_layout.py)."""
