"""Data sources: GroupLens downloads (verified archives) and ML-20m-like synthetic ratings."""
