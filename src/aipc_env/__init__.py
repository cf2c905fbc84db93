"""aipc-env: reproducible NF4 QLoRA fine-tuning environments for Intel AI PCs."""

__version__ = "0.1.0"
