package controller

// Labels Tusk puts on the objects it creates.
const (
	// LabelCluster names the PostgresCluster an object belongs to.
	LabelCluster = "tusk.dev/cluster"
)
