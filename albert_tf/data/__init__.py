"""Pretraining-data pipeline: corpus preparation, vocabulary training, TFRecord generation."""

