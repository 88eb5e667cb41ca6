//! `mcp-task-gateway admin webhooks ...`: subscriptions, their outboxes and dead
//! letters, and redelivering them.

use clap::Subcommand;
use http::Method;

use super::{Api, age, print, table};
use crate::admin::wire::{EventView, RedeliverReply, SubscriptionDetail, WebhookList};

#[derive(Debug, Subcommand)]
pub(super) enum WebhooksCommand {
    /// Every subscription: pending events, dead letters, the oldest pending event's age.
    List,
    /// One subscription's pending events (attempts, last error, next try) and dead
    /// letters.
    Show { subscription: String },
    /// Puts dead letters back in the outbox: one (`--event`) or all of the subscription's.
    Redeliver {
        subscription: String,
        #[arg(long)]
        event: Option<String>,
    },
}

/// Subscription and event ids are the gateway's (`wh-<hex>`, `msg_<hex>`).
fn id(text: &str) -> Result<&str, String> {
    if !text.is_empty()
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    {
        Ok(text)
    } else {
        Err(format!("{text:?} is not a subscription or event id"))
    }
}

pub(super) async fn run(api: &Api, command: &WebhooksCommand, json: bool) -> Result<(), String> {
    match command {
        WebhooksCommand::List => {
            let (raw, list): (_, WebhookList) = api.call(Method::GET, "webhooks").await?;
            print(json, &raw, || list_table(&list));
        }
        WebhooksCommand::Show { subscription } => {
            let path = format!("webhooks/{}", id(subscription)?);
            let (raw, detail): (_, SubscriptionDetail) = api.call(Method::GET, &path).await?;
            print(json, &raw, || detail_table(&detail));
        }
        WebhooksCommand::Redeliver {
            subscription,
            event,
        } => {
            let mut path = format!("webhooks/{}/redeliver", id(subscription)?);
            if let Some(event) = event {
                path.push_str(&format!("?event={}", id(event)?));
            }
            let (raw, reply): (_, RedeliverReply) = api.call(Method::POST, &path).await?;
            print(json, &raw, || {
                format!(
                    "{} dead letter(s) of {} back in the outbox",
                    reply.redelivered, reply.subscription
                )
            });
        }
    }
    Ok(())
}

fn list_table(list: &WebhookList) -> String {
    if list.subscriptions.is_empty() {
        return "no webhook subscriptions".into();
    }
    let mut out = table(&["SUBSCRIPTION", "URL", "PENDING", "OLDEST", "DEAD LETTERS"]);
    for s in &list.subscriptions {
        out.add_row(vec![
            s.id.clone(),
            s.url.clone(),
            s.pending.to_string(),
            s.oldest_pending_age_ms.map(age).unwrap_or_default(),
            s.dead_letters.to_string(),
        ]);
    }
    out.to_string()
}

fn events_table(events: &[EventView], dead: bool) -> String {
    let last = if dead { "DEAD SINCE" } else { "NEXT TRY IN" };
    let mut out = table(&["EVENT", "TYPE", "TASK", "ATTEMPTS", "LAST ERROR", last]);
    for e in events {
        let when = if dead {
            e.dead_at.clone().unwrap_or_default()
        } else {
            e.next_try_in_ms
                .map(|ms| format!("{ms} ms"))
                .unwrap_or_else(|| "after earlier events".into())
        };
        out.add_row(vec![
            e.event_id.clone(),
            e.kind.clone(),
            e.task_id.clone(),
            e.attempts.to_string(),
            e.last_error.clone().unwrap_or_default(),
            when,
        ]);
    }
    out.to_string()
}

fn detail_table(detail: &SubscriptionDetail) -> String {
    let s = &detail.subscription;
    format!(
        "{} {}\nevents: {}\npending: {}, dead letters: {}\n\npending:\n{}\n\ndead letters:\n{}",
        s.id,
        s.url,
        s.events.join(", "),
        s.pending,
        s.dead_letters,
        events_table(&detail.pending, false),
        events_table(&detail.dead_letters, true),
    )
}
