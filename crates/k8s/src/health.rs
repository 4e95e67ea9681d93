//! The `healthCheckNodePort` answers of `externalTrafficPolicy: Local`
//! LoadBalancer services, as kube-proxy's service health server gives them
//! (`pkg/proxy/healthcheck/service_health.go`).
//!
//! A cloud load balancer probes every node on the service's
//! `healthCheckNodePort` and sends traffic only to the nodes that answer 200,
//! so a node without a local endpoint is taken out before it would drop
//! traffic. The HTTP server itself lives with the caller (it is I/O); this
//! module decides what it says.

/// One health check server a node runs for one Service.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HealthCheck {
    /// The TCP port to listen on (`spec.healthCheckNodePort`), on the
    /// node's addresses.
    pub port: u16,
    /// Namespace of the Service.
    pub namespace: String,
    /// Name of the Service.
    pub name: String,
    /// How many distinct local endpoint addresses of the Service are ready
    /// (over all its ports and address families; terminating ones do not
    /// count, so a node whose endpoints are all shutting down fails the
    /// check and is drained by the load balancer).
    pub local_endpoints: usize,
}

impl HealthCheck {
    /// The HTTP status and JSON body kube-proxy answers with, assuming the
    /// proxy itself is healthy: `200` with at least one ready local
    /// endpoint, `503` without.
    pub fn response(&self) -> (u16, String) {
        self.response_with(true)
    }

    /// [`HealthCheck::response`] when the caller knows whether the proxy
    /// is healthy (kube-proxy's `serviceProxyHealthy`: its rules are in
    /// sync): an unhealthy proxy answers 503 whatever the endpoints.
    /// The body has kube-proxy's exact layout (tab-indented; served as
    /// `Content-Type: application/json` with `X-Content-Type-Options:
    /// nosniff`).
    pub fn response_with(&self, proxy_healthy: bool) -> (u16, String) {
        let status = if self.local_endpoints != 0 && proxy_healthy {
            200
        } else {
            503
        };
        let body = format!(
            "{{\n\t\"service\": {{\n\t\t\"namespace\": {},\n\t\t\"name\": {}\n\t}},\n\t\"localEndpoints\": {},\n\t\"serviceProxyHealthy\": {}\n}}",
            quote(&self.namespace),
            quote(&self.name),
            self.local_endpoints,
            proxy_healthy
        );
        (status, body)
    }
}

/// A JSON string literal (names are DNS labels, but nothing here trusts that).
fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hc(n: usize) -> HealthCheck {
        HealthCheck {
            port: 32000,
            namespace: "ns1".into(),
            name: "svc1".into(),
            local_endpoints: n,
        }
    }

    /// kube-proxy's `TestServer` expectations: 200 with endpoints, 503
    /// without, and the body names the service and the count.
    #[test]
    fn answers_like_kube_proxy() {
        let (code, body) = hc(2).response();
        assert_eq!(code, 200);
        assert_eq!(
            body,
            "{\n\t\"service\": {\n\t\t\"namespace\": \"ns1\",\n\t\t\"name\": \"svc1\"\n\t},\n\t\"localEndpoints\": 2,\n\t\"serviceProxyHealthy\": true\n}"
        );
        assert_eq!(hc(0).response().0, 503);
        assert!(hc(0).response().1.contains("\"localEndpoints\": 0,"));
        let (code, body) = hc(3).response_with(false);
        assert_eq!(code, 503);
        assert!(body.contains("\"serviceProxyHealthy\": false"));
    }

    #[test]
    fn body_is_json_even_for_odd_names() {
        let mut h = hc(1);
        h.name = "a\"b\\c\n".into();
        let v: serde_json::Value = serde_json::from_str(&h.response().1).unwrap();
        assert_eq!(v["service"]["name"], "a\"b\\c\n");
        assert_eq!(v["localEndpoints"], 1);
    }
}
