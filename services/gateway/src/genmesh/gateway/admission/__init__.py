"""Who may be served, and when: API keys, tickets and the model queue, grants, rate limits and quotas."""
