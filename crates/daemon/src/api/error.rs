//! The API's one error shape: `{"code", "message", "field"}` with an HTTP
//! status, and how the control plane's refusals map onto it (a service
//! owned by another source is 409 naming its owner).

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use rvs_control::state::ExecError;
use rvs_core::ipvs::CtlError;
use serde::Serialize;
use utoipa::ToSchema;

/// An error as the API answers it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, ToSchema)]
pub(crate) struct ErrorBody {
    /// A stable machine-readable code (`bad_id`, `owned`, `precondition_failed`, ...).
    pub code: String,
    /// What went wrong, for a person.
    pub message: String,
    /// The request field at fault, when one is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
}

/// An error with its status: every handler's `Err`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ApiError {
    /// HTTP status.
    pub status: StatusCode,
    /// The body.
    pub body: ErrorBody,
}

impl ApiError {
    /// An error of `status` with `code` and `message`.
    pub(crate) fn new(status: StatusCode, code: &str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            body: ErrorBody {
                code: code.to_owned(),
                message: message.into(),
                field: None,
            },
        }
    }

    /// A 400 that names the request field at fault.
    pub(crate) fn field(field: &str, message: impl Into<String>) -> Self {
        let mut e = ApiError::new(StatusCode::BAD_REQUEST, "invalid_field", message);
        e.body.field = Some(field.to_owned());
        e
    }

    /// 404 for a service or real server that is not there.
    pub(crate) fn not_found(what: impl Into<String>) -> Self {
        ApiError::new(StatusCode::NOT_FOUND, "not_found", what)
    }

    /// 412: the resource changed since the client's `If-Match` ETag.
    pub(crate) fn stale(etag: &str) -> Self {
        ApiError::new(
            StatusCode::PRECONDITION_FAILED,
            "precondition_failed",
            format!("If-Match does not match the current ETag \"{etag}\": read it again"),
        )
    }

    /// 503: the daemon is stopping.
    pub(crate) fn stopping() -> Self {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "stopping",
            "rvsd is stopping",
        )
    }
}

impl From<CtlError> for ApiError {
    fn from(e: CtlError) -> Self {
        let message = e.to_string();
        let (status, code) = match &e {
            CtlError::Owned(_) => (StatusCode::CONFLICT, "owned"),
            CtlError::ServiceExists | CtlError::DestExists | CtlError::LaddrExists => {
                (StatusCode::CONFLICT, "exists")
            }
            CtlError::NoService | CtlError::NoDest | CtlError::NoLaddr => {
                (StatusCode::NOT_FOUND, "not_found")
            }
            CtlError::SchedulerNotFound => {
                return ApiError::field("scheduler", message);
            }
            CtlError::Unsupported(_) => (StatusCode::CONFLICT, "unsupported"),
            _ => (StatusCode::BAD_REQUEST, "invalid"),
        };
        ApiError::new(status, code, message)
    }
}

impl From<ExecError> for ApiError {
    fn from(e: ExecError) -> Self {
        ApiError::from(e.error)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, axum::Json(self.body)).into_response()
    }
}

/// Every error status an operation may answer, for the document.
#[derive(utoipa::IntoResponses)]
#[allow(dead_code)]
pub(crate) enum Failures {
    /// A malformed id, body, query or field (`field` names it).
    #[response(status = 400)]
    BadRequest(ErrorBody),
    /// No or a wrong bearer token.
    #[response(status = 401)]
    Unauthorized(ErrorBody),
    /// Writes are disabled (`--api-writes` not given).
    #[response(status = 403)]
    Forbidden(ErrorBody),
    /// No such service, real server or pool entry.
    #[response(status = 404)]
    NotFound(ErrorBody),
    /// Owned by another source, already exists, or refused by the data plane.
    #[response(status = 409)]
    Conflict(ErrorBody),
    /// `If-Match` does not match the resource's ETag.
    #[response(status = 412)]
    PreconditionFailed(ErrorBody),
    /// The body is larger than the API accepts.
    #[response(status = 413)]
    TooLarge(ErrorBody),
    /// The client sends requests faster than its rate bound.
    #[response(status = 429)]
    TooMany(ErrorBody),
    /// rvsd is stopping.
    #[response(status = 503)]
    Unavailable(ErrorBody),
}
