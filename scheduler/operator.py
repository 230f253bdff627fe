"""The kopf operator: the only module that imports kopf.

Its handlers turn watch events on Nodes, Pods, PodGroups and ConfigMaps into cache updates
and start the scheduling loop of ``scheduler.shell``. It holds no scheduling logic itself.
"""
