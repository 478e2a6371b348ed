"""Executors: where the real compute of a run happens (this process, worker processes, Ray, stacked).

The scenario's ``executor:`` block (:class:`~p2pfl.executors.spec.ExecutorSpec`)
picks one; :func:`~p2pfl.executors.select.make_executor` builds it. Results never
depend on the choice (``batched`` within its stated tolerance). Importing this
package imports nothing heavy.
"""
