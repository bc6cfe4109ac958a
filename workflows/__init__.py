"""The package of the workflow side: ``McpTaskWorkflow``, its steps, the pure decisions, the clients that start it."""
