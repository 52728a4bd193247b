"""The Keras API on raw text: `AlbertTextClassifier`, `AlbertTextTagger` (fit, evaluate,
predict and export on strings) and the in-graph `AlbertTextPreprocessor`."""
