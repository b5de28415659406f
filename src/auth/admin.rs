//! Who may use the admin surface (`/metrics`, `/admin/...`): a key with `admin = true`, signing
//! with SigV4 as on the native API, or the bearer token of `[admin]` (what Prometheus sends).
//! In development mode without a bearer token, anyone on loopback.

use super::{Action, AuthError, KeyTable, Principal};
use crate::config::AdminToken;
use axum::extract::Request;
use std::sync::Arc;
use subtle::ConstantTimeEq;

/// What the admin layer checks against.
pub struct AdminAuth {
    pub keys: Arc<KeyTable>,
    /// Swapped by a reload when the token file changes (rotation). Whether there is a token
    /// at all never changes while running: protected mode was decided on it at start-up.
    token: arc_swap::ArcSwapOption<AdminToken>,
}

impl AdminAuth {
    pub fn new(keys: Arc<KeyTable>, token: Option<AdminToken>) -> AdminAuth {
        AdminAuth {
            keys,
            token: arc_swap::ArcSwapOption::from(token.map(Arc::new)),
        }
    }

    pub fn has_token(&self) -> bool {
        self.token.load().is_some()
    }

    /// The bearer token from now on; refused when it would set or unset one.
    pub fn replace_token(&self, token: Option<AdminToken>) -> Result<(), &'static str> {
        if token.is_some() != self.token.load().is_some() {
            return Err("setting or removing the admin bearer token needs a restart");
        }
        self.token.store(token.map(Arc::new));
        Ok(())
    }
}

impl AdminAuth {
    /// The admin principal of `req` (with the request, its body checked if signed).
    pub async fn admit(&self, req: Request) -> Result<Request, AuthError> {
        let auth = req
            .headers()
            .get(http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok());
        // One snapshot of the token for the whole check.
        let token = self.token.load_full();
        if let Some(offered) = auth.and_then(|a| a.strip_prefix("Bearer ")) {
            let Some(token) = &token else {
                return Err(AuthError::Denied(
                    "no bearer token is configured ([admin] bearer_token_file); sign the request with SigV4 using a key with admin = true".into(),
                ));
            };
            if !bool::from(offered.trim().as_bytes().ct_eq(token.0.as_bytes())) {
                return Err(AuthError::Denied(
                    "the bearer token does not match [admin]'s".into(),
                ));
            }
            tracing::Span::current().record("principal", "admin-token");
            let mut req = req;
            req.extensions_mut().insert(Principal::AdminToken);
            return Ok(req);
        }
        if auth.is_none() && token.is_some() && self.keys.dev_mode() {
            // A bearer token closes the admin surface even in development mode.
            return Err(AuthError::Missing);
        }
        let req = super::native::principal_of(&self.keys, req).await?;
        let who = req
            .extensions()
            .get::<Principal>()
            .cloned()
            .ok_or(AuthError::Missing)?;
        if matches!(who, Principal::Dev) && token.is_some() {
            return Err(AuthError::Missing);
        }
        self.keys.authorize(&who, Action::Admin)?;
        Ok(req)
    }
}
