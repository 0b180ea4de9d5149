"""Training loops. ``recombine.train.fit(config, run_dir)`` runs (or resumes) one supervised run."""

from recombine.train.supervised import TrainingDiverged, fit

__all__ = ["TrainingDiverged", "fit"]
