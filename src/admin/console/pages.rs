//! The console's HTML: the sign-in page, and the one page every view is drawn in by the
//! script. No task's data is ever written into HTML here; the script puts it in the
//! DOM as text.

use bytes::Bytes;
use http::{Response, StatusCode, header};
use http_body_util::Full;

use super::Reply;
use super::assets;

/// Which view the script draws.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum View {
    Overview,
    Tasks,
    Task,
}

impl View {
    fn name(self) -> &'static str {
        match self {
            Self::Overview => "overview",
            Self::Tasks => "tasks",
            Self::Task => "task",
        }
    }
}

/// The sign-in form; after a wrong token, saying only that.
pub(super) fn sign_in(wrong_token: bool) -> Reply {
    let (status, notice) = if wrong_token {
        (
            StatusCode::UNAUTHORIZED,
            r#"<p class="error" id="sign-in-error" role="alert">wrong token</p>"#,
        )
    } else {
        (StatusCode::OK, "")
    };
    html(status, assets::SIGN_IN.replace("{{notice}}", notice))
}

/// The page of a signed-in view. `csrf` is the session's token: URL-safe base64, so
/// nothing in it needs escaping in an attribute.
pub(super) fn app(view: View, csrf: &str) -> Reply {
    let page = assets::APP
        .replace("{{view}}", view.name())
        .replace("{{csrf}}", csrf);
    html(StatusCode::OK, page)
}

fn html(status: StatusCode, page: String) -> Reply {
    Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, "text/html; charset=utf-8")
        .body(Full::new(Bytes::from(page)))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    async fn text(reply: Reply) -> String {
        let body = reply.into_body().collect().await.unwrap().to_bytes();
        String::from_utf8(body.to_vec()).unwrap()
    }

    #[tokio::test]
    async fn pages_fill_their_slots_and_nothing_else() {
        let page = text(app(View::Task, "abc_-9")).await;
        assert!(page.contains(r#"content="abc_-9""#), "{page}");
        assert!(page.contains(r#"data-view="task""#), "{page}");
        assert!(!page.contains("{{"), "{page}");
        let wrong = sign_in(true);
        assert_eq!(wrong.status(), StatusCode::UNAUTHORIZED);
        let wrong = text(wrong).await;
        assert!(wrong.contains("wrong token") && !wrong.contains("{{"));
        assert!(!text(sign_in(false)).await.contains("wrong token"));
    }
}
