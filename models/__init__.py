"""NeuMF model, training, evaluation and export (reads the ETL's output; never imports serving)."""
