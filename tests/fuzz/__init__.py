"""Structure-aware fuzzing of the read path (see run.py)."""
