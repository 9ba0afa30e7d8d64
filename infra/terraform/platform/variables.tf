variable "kubeconfig_path" {
  description = "Path of the kubeconfig written by `gcloud container clusters get-credentials`"
  type        = string
  default     = "~/.kube/config"
}

variable "prometheus_stack_version" {
  description = "Version of the kube-prometheus-stack Helm chart"
  type        = string
  default     = "65.1.1"
}
