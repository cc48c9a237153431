"""The Kubernetes backend (docs/kubernetes.md): the console places workers, a controller of
its own runs them as Pods of an existing cluster and reads back their statuses and logs."""
