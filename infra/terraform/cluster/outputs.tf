output "cluster_name" {
  description = "Name of the created cluster (for gcloud container clusters get-credentials)"
  value       = google_container_cluster.this.name
}

output "zone" {
  description = "Zone of the cluster"
  value       = var.zone
}
