#!/usr/bin/env python3
"""Scrapes Prometheus endpoints as Prometheus would and prints what its parser read, as JSON.

    scrape_metrics.py http://127.0.0.1:9400/metrics ...
    -> {"http://127.0.0.1:9400/metrics": [{"name": ..., "labels": {...}, "value": ...}, ...], ...}

The HTTP client is urllib and the parser is prometheus_client's (Debian: python3-prometheus-client),
so a test that reads this output checks the exposition against the reference parser, not ours.
"""
import json
import sys
import urllib.request

from prometheus_client.parser import text_string_to_metric_families


def scrape(url):
    with urllib.request.urlopen(url, timeout=10) as response:
        if response.status != 200:
            raise SystemExit(f"{url}: HTTP {response.status}")
        text = response.read().decode("utf-8")
    return [{"name": s.name, "labels": s.labels, "value": s.value}
            for family in text_string_to_metric_families(text) for s in family.samples]


print(json.dumps({url: scrape(url) for url in sys.argv[1:]}))
