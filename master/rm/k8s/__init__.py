"""The Kubernetes resource manager (docs/kubernetes.md).

config.py (pure) parses Determined 0.38's `resource_manager: {type: kubernetes, ...}`;
manifest.py (pure) builds one batch/v1 Job per allocation; capacity.py (pure) turns nodes and
foreign pods into the scheduler's free slots; pods.py (pure) reads a pod's state; informer.py
keeps a list + watch cache (re-listing on 410 Gone); manager.py is the RM itself. Only
manager.py and informer.py import the `kubernetes` client (the `k8s` extra).
"""
