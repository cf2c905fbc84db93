"""The ground floor every room stands on: the one reader and atomic writer (fileio), the multi-file writer
(outputs), versioned file formats (formats), version and name rules (specs), platforms, the process layer (procs),
interrupt handling (interrupts) and the template renderer (templating). Nothing here imports a room above it."""
