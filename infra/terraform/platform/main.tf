# Stage 2: the platform — kube-prometheus-stack in namespace "monitoring", scraping every 5 s and
# discovering pods annotated prometheus.io/scrape.
terraform {
  required_providers {
    helm = {
      source  = "hashicorp/helm"
      version = ">= 2.12"
    }
  }
}

provider "helm" {
  kubernetes {
    config_path = var.kubeconfig_path
  }
}

resource "helm_release" "prometheus" {
  name             = "kube-prometheus-stack"
  repository       = "https://prometheus-community.github.io/helm-charts"
  chart            = "kube-prometheus-stack"
  version          = var.prometheus_stack_version
  namespace        = "monitoring"
  create_namespace = true
  values = [yamlencode({
    prometheus = {
      prometheusSpec = {
        scrapeInterval                          = "5s"
        podMonitorSelectorNilUsesHelmValues     = false
        serviceMonitorSelectorNilUsesHelmValues = false
        nodeSelector                            = { "servetwin/pool" = "cpu" }
      }
    }
  })]
}
