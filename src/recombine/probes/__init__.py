"""Post-hoc analyses of trained runs."""
