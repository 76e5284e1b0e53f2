"""ampbench's pytest face."""
