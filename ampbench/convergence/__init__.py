"""Convergence: does a precision mode still learn, and why loss scaling exists. Pure harness, no pytest;
the cell tests are ``ampbench.suite.convergence``.

Its modules, by job: `images` holds the real images the cells train on (scikit-learn's digits, nothing
downloaded) and fits any images to a model's input; `training` trains a zoo model in one mode for a fixed
budget and scores it on held-out images; `parity` holds that accuracy against the parity mode's and
makes the cell's record; `underflow` shows an fp16 backward flushing unscaled gradients to zero.
"""
