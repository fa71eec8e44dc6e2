"""Data sources (`ncf download`, `ncf synth`, `ncf convert`): GroupLens downloads (verified archives) and ML-20m-like synthetic ratings."""
