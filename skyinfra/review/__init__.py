"""Pull-request review of a cluster change: what `skyinfra plan` writes (plan.md, its JSON
summary) and what `up`/`apply` check before they change anything.

Pure functions over Terraform's plan JSON (``terraform show -json PLANFILE``) and the spec:

- summary.py: the plan read as a cluster change (counts, destroy/replace warnings with
  Terraform's reasons, the topology before and after);
- cost.py: $/hour before and after and over the cluster's lifetime, from prices.json;
- guardrails.py: the spec's ``[guardrails]`` and the fixed checks, each passed or failed;
- mermaid.py: the cluster as a Mermaid diagram, changed parts marked;
- markdown.py: all of it as one pull-request comment under GitHub's size limit.
"""
