"""Shims for a checkout: `python -m export.X` runs `albert_tf.export.X` (the module moved into
the albert_tf package, docs/architecture.md). Not installed; an installed albert_tf answers
`python -m albert_tf.export.X` and the `albert-*` console scripts."""
