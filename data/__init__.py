"""Shims for a checkout: `python -m data.X` runs `albert_tf.data.X` (the module moved into the
albert_tf package, docs/architecture.md). Not installed; an installed albert_tf answers
`python -m albert_tf.data.X` and the `albert-*` console scripts."""
