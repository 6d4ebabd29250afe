//! The egress service (guest port 18080). Network policy is not a feature of this product:
//! outbound traffic is governed by the host's overlay network, so the service reports
//! allow-all and refuses every policy change with a clear "not supported" error.

use std::sync::Arc;

use hyper::body::Incoming;
use hyper::{Method, Request, StatusCode};
use serde_json::json;

use crate::config::ServiceConfig;
use crate::http::{self, ApiError, Resp};

pub const TOKEN_HEADER: &str = "opensandbox-egress-auth";

pub async fn run(config: ServiceConfig) -> Result<(), String> {
    let listener = tokio::net::TcpListener::bind(config.addr).await.map_err(|e| format!("cannot listen on {}: {e}", config.addr))?;
    let bound = listener.local_addr().map_err(|e| e.to_string())?;
    if config.announce {
        println!("listening {bound}");
    }
    let limits = config.limits;
    let config = Arc::new(config);
    http::serve(listener, limits, move |req, _| {
        let config = config.clone();
        async move { handle(&config, req).unwrap_or_else(ApiError::into_response) }
    })
    .await
    .map_err(|e| e.to_string())
}

fn handle(config: &ServiceConfig, req: Request<Incoming>) -> Result<Resp, ApiError> {
    let path = req.uri().path();
    // The health route is unauthenticated, as upstream: it is the readiness probe.
    if path == "/healthz" {
        return match *req.method() {
            Method::GET => Ok(http::text(StatusCode::OK, "ok")),
            _ => Err(method_not_allowed(req.method(), path)),
        };
    }
    if let Some(expected) = &config.token {
        let presented = req.headers().get(TOKEN_HEADER).map(|v| v.as_bytes()).unwrap_or_default();
        if !http::token_matches(presented, expected) {
            return Err(ApiError::new(StatusCode::UNAUTHORIZED, "UNAUTHORIZED", "invalid or missing header OPENSANDBOX-EGRESS-AUTH"));
        }
    }
    match (path, req.method()) {
        ("/policy", &Method::GET) => Ok(http::json(&json!({
            "status": "ok",
            "mode": "allow_all",
            "enforcementMode": "dns",
            "reason": "network policy is not supported by this sandbox; outbound traffic is allowed",
            "policy": {"defaultAction": "allow", "egress": []},
        }))),
        ("/policy", &Method::PATCH | &Method::DELETE | &Method::POST | &Method::PUT) => Err(ApiError::not_supported(
            "network policy is not supported by this sandbox; the egress policy is always allow-all",
        )),
        ("/policy", m) => Err(method_not_allowed(m, path)),
        _ => Err(ApiError::not_found("NOT_FOUND", format!("no route {} {path}", req.method()))),
    }
}

fn method_not_allowed(method: &Method, path: &str) -> ApiError {
    ApiError::new(StatusCode::METHOD_NOT_ALLOWED, "METHOD_NOT_ALLOWED", format!("method {method} is not allowed on {path}"))
}
