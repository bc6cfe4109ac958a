"""The package of the processes: the plugin, the CLI, the embedded Temporal, configuration."""
