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
  # checkov:skip=CKV_GCP_25: a public control plane reached from the operator's workstation; a private cluster needs a bastion and Cloud NAT, out of scope for a one-GPU testbed
  # checkov:skip=CKV_GCP_64: as above (private nodes need Cloud NAT to pull the engine images)
  # checkov:skip=CKV_GCP_20: authorized networks depend on the operator's address; set master_authorized_networks_config for your site
  # checkov:skip=CKV_GCP_65: RBAC through Google Groups needs a Workspace domain the testbed does not assume
  # checkov:skip=CKV_GCP_66: Binary Authorization would need attestations for the public engine images
  name                        = var.cluster_name
  location                    = var.zone
  remove_default_node_pool    = true
  initial_node_count          = 1
  deletion_protection         = false
  enable_intranode_visibility = true
  resource_labels             = { app = "servetwin" }
  release_channel {
    channel = "REGULAR"
  }
  ip_allocation_policy {}
  network_policy {
    enabled  = true
    provider = "CALICO"
  }
  addons_config {
    network_policy_config {
      disabled = false
    }
  }
  master_auth {
    client_certificate_config {
      issue_client_certificate = false
    }
  }
  workload_identity_config {
    workload_pool = "${var.project}.svc.id.goog"
  }
  node_config {
    shielded_instance_config {
      enable_secure_boot          = true
      enable_integrity_monitoring = true
    }
    workload_metadata_config {
      mode = "GKE_METADATA"
    }
  }
}

resource "google_container_node_pool" "cpu" {
  name       = "cpu"
  cluster    = google_container_cluster.this.name
  location   = var.zone
  node_count = 1
  management {
    auto_repair  = true
    auto_upgrade = true
  }
  node_config {
    machine_type = "e2-standard-4"
    shielded_instance_config {
      enable_secure_boot          = true
      enable_integrity_monitoring = true
    }
    workload_metadata_config {
      mode = "GKE_METADATA"
    }
    labels       = { "servetwin/pool" = "cpu" }
    oauth_scopes = ["https://www.googleapis.com/auth/cloud-platform"]
  }
}

resource "google_container_node_pool" "gpu" {
  name       = "gpu-l4"
  cluster    = google_container_cluster.this.name
  location   = var.zone
  node_count = 1
  management {
    auto_repair  = true
    auto_upgrade = true
  }
  node_config {
    machine_type = "g2-standard-8"
    shielded_instance_config {
      enable_secure_boot          = true
      enable_integrity_monitoring = true
    }
    workload_metadata_config {
      mode = "GKE_METADATA"
    }
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
