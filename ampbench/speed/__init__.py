"""The speed cell: a mode against fp32 in interleaved rounds of device and wall time."""
