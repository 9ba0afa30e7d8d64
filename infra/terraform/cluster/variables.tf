variable "project" {
  description = "GCP project id that hosts the testbed"
  type        = string
}

variable "region" {
  description = "GCP region of the cluster (e.g. us-central1)"
  type        = string
  default     = "us-central1"
}

variable "zone" {
  description = "Zone with L4 capacity for the GPU node pool (e.g. us-central1-a)"
  type        = string
  default     = "us-central1-a"
}

variable "cluster_name" {
  description = "Name of the GKE cluster"
  type        = string
  default     = "servetwin"
}

variable "gpu_spot" {
  description = "Use Spot VMs for the L4 node (cheaper; a reclaimed node discards its condition)"
  type        = bool
  default     = false
}
