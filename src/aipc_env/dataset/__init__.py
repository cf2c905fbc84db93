"""Training datasets: scanning the three formats (local dir, parquet dir, CSV) into samples, and validation."""

from aipc_env.dataset.scan import Sample, Scan, scan_dataset
from aipc_env.dataset.validate import Verdict, validate_dataset

__all__ = ["Sample", "Scan", "Verdict", "scan_dataset", "validate_dataset"]
