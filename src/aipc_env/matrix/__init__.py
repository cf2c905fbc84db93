"""The compatibility matrix (environments/matrix.yaml) and what is derived from it: which pair a set of installed
packages is (resolve), and reading pasted package lists (piplist). Pure logic; never imports torch."""

from aipc_env.matrix.model import Matrix, Pair, Pin, load_matrix, versions_equal

__all__ = ["Matrix", "Pair", "Pin", "load_matrix", "versions_equal"]
