"""Serving: checkpoint to Triton repository (export), the tritonserver lifecycle, and its clients."""
