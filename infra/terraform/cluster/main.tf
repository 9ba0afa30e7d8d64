# Stage 1: a zonal GKE cluster with one tainted L4 node (g2-standard-8) for the engine and one CPU node
# (e2-standard-4) for Prometheus, control components and the workload generator.
terraform {
  required_providers {
    google = {
      source  = "hashicorp/google"
      version = ">= 5.0"
    }
  }
}

provider "google" {
  project = var.project
  region  = var.region
}

resource "google_container_cluster" "this" {
  name                     = var.cluster_name
  location                 = var.zone
  remove_default_node_pool = true
  initial_node_count       = 1
  deletion_protection      = false
  release_channel {
    channel = "REGULAR"
  }
}

resource "google_container_node_pool" "cpu" {
  name       = "cpu"
  cluster    = google_container_cluster.this.name
  location   = var.zone
  node_count = 1
  node_config {
    machine_type = "e2-standard-4"
    labels       = { "servetwin/pool" = "cpu" }
    oauth_scopes = ["https://www.googleapis.com/auth/cloud-platform"]
  }
}

resource "google_container_node_pool" "gpu" {
  name       = "gpu-l4"
  cluster    = google_container_cluster.this.name
  location   = var.zone
  node_count = 1
  node_config {
    machine_type = "g2-standard-8"
    spot         = var.gpu_spot
    labels       = { "servetwin/pool" = "gpu" }
    guest_accelerator {
      type  = "nvidia-l4"
      count = 1
      gpu_driver_installation_config {
        gpu_driver_version = "LATEST"
      }
    }
    taint {
      key    = "nvidia.com/gpu"
      value  = "present"
      effect = "NO_SCHEDULE"
    }
    oauth_scopes = ["https://www.googleapis.com/auth/cloud-platform"]
  }
}
