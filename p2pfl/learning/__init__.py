"""Models, local training, evaluation and aggregation maths."""
