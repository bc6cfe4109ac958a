"""The steps of ``McpTaskWorkflow``, one module per phase; each step function returns the next step.

Side by side and importing none of each other (a contract): ``messages`` (query, updates, signals), ``submit``,
``wait``, ``input``, ``retrieve``, ``cancel``, ``finish``; below them ``endings``, then ``machine`` | ``steps``, then
``patches``.
"""
