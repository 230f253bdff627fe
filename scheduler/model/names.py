"""Label and annotation keys the scheduler reads and writes, in one place.

The gang keys are other projects' public APIs (scheduler-plugins, Koordinator, Sakkara): they
are spelled here exactly as those projects spell them, so existing workloads just work.
"""

# scheduler-plugins Coscheduling: the pod's PodGroup, by name, in the pod's namespace.
POD_GROUP_LABEL = "scheduling.x-k8s.io/pod-group"

# The older (kube-batch / scheduler-plugins v0.18) spellings.
LEGACY_POD_GROUP_LABEL = "pod-group.scheduling.sigs.k8s.io"
LEGACY_NAME = "pod-group.scheduling.sigs.k8s.io/name"
LEGACY_MIN_AVAILABLE = "pod-group.scheduling.sigs.k8s.io/min-available"

# Koordinator's annotation API, as its GangScheduling proposal gives it.
KOORD_PREFIX = "gang.scheduling.koordinator.sh/"
KOORD_NAME = KOORD_PREFIX + "name"
KOORD_MIN_AVAILABLE = KOORD_PREFIX + "min-available"
KOORD_TOTAL_NUMBER = KOORD_PREFIX + "total-number"
KOORD_WAITING_TIME = KOORD_PREFIX + "waiting-time"
KOORD_MODE = KOORD_PREFIX + "mode"
KOORD_GROUPS = KOORD_PREFIX + "groups"
KOORD_TIMEOUT = KOORD_PREFIX + "timeout"  # written: "true" once the gang timed out

OUR_PREFIX = "gang-scheduler.io/"
# Constraint JSON (Sakkara's form) on a PodGroup, or on the pods of an annotation-only gang.
TOPOLOGY_CONSTRAINTS = OUR_PREFIX + "topology-constraints"
# Written on a PodGroup placed by the topology solver: the placement tree as JSON.
PLACEMENT = OUR_PREFIX + "placement"
# Written on the pods of a gang without a PodGroup when its first attempt fails: when that
# attempt was (RFC 3339), so a restart or a failover does not restart the gang's timeout.
FIRST_ATTEMPT = OUR_PREFIX + "first-attempt"
# Written, with --forecast-interval, on the first waiting pod of a gang that has no PodGroup
# of ours to carry the EstimatedStart condition: the minute it is expected to start (RFC
# 3339), or "unknown: <why>"; taken off once it is placed.
EXPECTED_START = OUR_PREFIX + "expected-start"
# On the pods of a gang: how to choose among the nodes that fit, "pack" (most allocated
# first: fewer fragmented nodes) or "spread" (least allocated first); --scoring otherwise.
SCORING = OUR_PREFIX + "scoring"
SCORINGS = ("pack", "spread")
# On a PodGroup or the pods of a gang: how long it may wait before it becomes the head gang,
# whose room is held as it frees (a duration, like waiting-time); --starvation-after otherwise.
STARVATION_AFTER = OUR_PREFIX + "starvation-after"
# On a PodGroup, the pods of a gang or their owner: how long the gang is expected to run once
# bound (a duration): what the scheduler counts on to say when waiting gangs will start.
EXPECTED_DURATION = OUR_PREFIX + "expected-duration"
# On the pods of a gang: the gangs whose past runs tell how long it runs (within its namespace);
# without it, gangs whose names differ only by a generated tail (train-x7k2p, train-28374650).
DURATION_CLASS = OUR_PREFIX + "duration-class"
# On a PodGroup, the pods of a gang or their owner: how long a running gang may have
# fewer running members than its minimum before the rest are evicted (a duration, or
# "never"); --stale-gang-after otherwise (off by default).
STALE_AFTER = OUR_PREFIX + "stale-after"

# Written on a pod by its bind (a Binding's annotations reach the pod): the scheduler name
# that bound it. A new leader finds the gangs whose all-or-nothing bind its predecessor
# was cut off in by this mark; a gang another binder started is not one of them.
BOUND_BY = OUR_PREFIX + "bound-by"

# On a pod: "true" lets consolidation move it (evict it so that its controller makes it
# again, where it fits elsewhere) to make room for a gang; a pod no controller owns never
# moves, whatever it says.
MOVABLE = OUR_PREFIX + "movable"

# On a pod (its template) or its owner: how the owner groups its pods into gangs, for pods
# that declare no gang: "none" (each pod alone), "whole" (the owner whole; a NonIndexed Job's
# pods are alone otherwise), "replica" (a JobSet: a gang per replica of a replicated Job).
OWNER_GANG = OUR_PREFIX + "owner-gang"
# KAI's convention: a label (or annotation) on the owner naming the PriorityClass of its gang.
OWNER_PRIORITY_CLASS = "priorityClassName"

# What the job frameworks write on the pods they create, read to know a pod's owner gang.
JOB_COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"
JOBSET_REPLICATED_JOB = "jobset.sigs.k8s.io/replicatedjob-name"
JOBSET_JOB_INDEX = "jobset.sigs.k8s.io/job-index"
JOBSET_EXCLUSIVE = "alpha.jobset.sigs.k8s.io/exclusive-topology"
LWS_NAME = "leaderworkerset.sigs.k8s.io/name"
LWS_GROUP_INDEX = "leaderworkerset.sigs.k8s.io/group-index"
LWS_EXCLUSIVE = "leaderworkerset.sigs.k8s.io/exclusive-topology"
KUBEFLOW_OPERATOR = "training.kubeflow.org/operator-name"
KUBEFLOW_JOB_NAME = "training.kubeflow.org/job-name"
SPARK_APP_NAME = "sparkoperator.k8s.io/app-name"
SPARK_LAUNCHED = "sparkoperator.k8s.io/launched-by-spark-operator"
SPARK_ROLE = "spark-role"

# Sakkara: the topology and group ConfigMaps, the pods' group, what is written back.
SAKKARA_TOPOLOGY = "sakkara.topology"
SAKKARA_GROUP = "sakkara.group"
SAKKARA_GROUP_NAME = "sakkara.group.name"
SAKKARA_RANK = "sakkara.member.rank"
SAKKARA_STATUS = "sakkara.member.status"
SAKKARA_RETRIES = "sakkara.member.retries"

# Volcano's (and kube-batch's before it) pod annotation: the pod's Volcano PodGroup, by name.
VOLCANO_GROUP_NAME = "scheduling.k8s.io/group-name"

# Queues. The queue of a gang: Volcano's PodGroup spec.queue; else the annotation Volcano
# reads on pods and PodGroups; else KubeRay's and Volcano's job label; else our label, on a
# PodGroup of any kind or on the pods. Without any, the gang is in the queue "default".
VOLCANO_QUEUE_NAME = "scheduling.volcano.sh/queue-name"
VOLCANO_QUEUE_LABEL = "volcano.sh/queue-name"
QUEUE = OUR_PREFIX + "queue"
# On a Queue: the namespaces whose gangs may use it, as a label selector in kubectl's syntax.
QUEUE_NAMESPACE_SELECTOR = OUR_PREFIX + "namespace-selector"

# Subgroups inside a gang for our PodGroups, upstream ones and Koordinator-annotated pods:
# Volcano's spec.subGroupPolicy, as JSON, in an annotation.
SUBGROUP_POLICY = OUR_PREFIX + "subgroup-policy"
# Volcano's networkTopology as JSON, for gangs of any kind: a JobSet's replicas, a
# LeaderWorkerSet's groups, a Koordinator gang, each kept inside one unit of a tier.
NETWORK_TOPOLOGY = OUR_PREFIX + "network-topology"

# The condition kube-scheduler writes on an upstream (scheduling.k8s.io) PodGroup, and so do we;
# only it is sent (a strategic merge by type), so other writers' conditions are left alone. Its
# type is the served version's: PodGroupScheduled in v1alpha2 (Kubernetes 1.36), renamed
# PodGroupInitiallyScheduled in v1beta1 and v1alpha3 (1.37).
UPSTREAM_SCHEDULED = "PodGroupScheduled"
UPSTREAM_INITIALLY_SCHEDULED = "PodGroupInitiallyScheduled"
UPSTREAM_CONDITIONS = (UPSTREAM_SCHEDULED, UPSTREAM_INITIALLY_SCHEDULED)
# A waiting gang's expected start (--forecast-interval) on a PodGroup of a kind that is not
# ours (upstream, Volcano): a condition type of our own, prefixed as Kubernetes asks of
# conditions that others add to a type. Our own PodGroup says it as EstimatedStart.
FOREIGN_ESTIMATED_START = OUR_PREFIX + "EstimatedStart"
# The Workload API version that named the condition PodGroupScheduled.
WORKLOAD_V1ALPHA2 = "scheduling.k8s.io/v1alpha2"
