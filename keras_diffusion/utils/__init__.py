"""What every floor of the library shares: argument checks, crash-safe files,
image grids, stateless draws, and the one home of private Keras behaviour."""
