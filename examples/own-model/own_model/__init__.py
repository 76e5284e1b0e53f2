"""A project's own model, registered with ampbench through the ``ampbench.models`` entry point."""
