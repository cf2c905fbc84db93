"""Inputs to locking and the compatibility matrix, shipped inside the package as aipc_env.environments."""
