"""Config files and the typed settings they hold."""
