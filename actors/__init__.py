"""Ray processes: the policy and PRM Serve deployments and the search actor (next issues)."""
