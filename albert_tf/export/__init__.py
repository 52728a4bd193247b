"""SavedModel (TF Serving) export, serving configuration, the serving client and the C++ loader."""

