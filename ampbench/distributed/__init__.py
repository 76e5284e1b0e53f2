"""Mixed precision past one GPU: communication variants, torchrun launches and their ranks."""
