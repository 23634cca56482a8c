"""What is sent: workloads, traces, images, structured requests, arms and the run's configuration."""
