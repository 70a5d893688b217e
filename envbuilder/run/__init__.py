"""What touches a container engine: builds, smoke jobs, multi-node runs, the Apptainer proof."""
