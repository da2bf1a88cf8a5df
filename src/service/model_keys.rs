//! Model key use cases: create (the secret is shown once), list, get, revoke. A model key
//! calls a project's models through the Gateway; it manages nothing (that is an API
//! token's job), so only project admins hand them out.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use chrono::{DateTime, Duration, NaiveDate, Utc};
use rand::RngCore;
use tracing::instrument;
use uuid::Uuid;

use super::access::authorize;
use super::projects::parse_uuid_cursor;
use super::tokens::hash_secret;
use super::{Actor, Context, Page, ServiceError, cursor, page_size};
use crate::domain::{FieldErrors, KeyUsage, KeyUsageDay, KeyUsageDeployment, ModelKey, Role};
use crate::store;
use crate::store::model_keys::NewKey;

/// Every model key starts with this: recognisable in a leak, and never taken for an API
/// token (`mpt_`).
pub const KEY_PREFIX: &str = "mpk_";
/// How much of the secret a listing shows: the prefix and 8 random characters.
const SHOWN: usize = KEY_PREFIX.len() + 8;
const MAX_LIFETIME_DAYS: i64 = 3650;
/// Deployments one key may name.
const MAX_DEPLOYMENTS: usize = 100;
const MAX_REQUESTS_PER_MINUTE: i32 = 1_000_000;
const MAX_CONCURRENT: i32 = 100_000;

/// Create a model key.
#[derive(Debug, Clone, Default)]
pub struct CreateKey {
    /// 1 to 63 letters, digits, '.', '_' or '-'; unique among the project's live keys.
    pub name: String,
    /// The deployments it may call, by name; `None`: every deployment of the project, those
    /// made later included.
    pub deployments: Option<Vec<String>>,
    pub requests_per_minute: Option<i32>,
    pub daily_token_budget: Option<i64>,
    pub max_concurrent: Option<i32>,
    /// When it stops working; `None`: when revoked.
    pub expires_at: Option<DateTime<Utc>>,
}

/// A new key and its secret. The secret is never shown again.
#[derive(Debug, Clone)]
pub struct CreatedKey {
    pub key: ModelKey,
    /// Sent as `Authorization: Bearer <secret>` (as OpenAI clients do) or `x-api-key`.
    pub secret: String,
}

/// Filters and paging for key lists.
#[derive(Debug, Clone, Default)]
pub struct ListKeys {
    /// Only keys that still work: neither revoked nor expired.
    pub live: Option<bool>,
    pub limit: Option<i64>,
    pub cursor: Option<String>,
}

/// 32 random bytes, base64url, with the key prefix.
fn new_secret() -> String {
    let mut bytes = [0u8; 32];
    // ThreadRng is a CSPRNG seeded from the operating system.
    rand::rng().fill_bytes(&mut bytes);
    format!("{KEY_PREFIX}{}", URL_SAFE_NO_PAD.encode(bytes))
}

fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 63
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// Checks every field of `request` but the deployments' existence, naming each wrong one.
fn validate(request: &CreateKey, now: DateTime<Utc>) -> FieldErrors {
    let mut errors = FieldErrors::new();
    if !valid_name(&request.name) {
        errors.push(
            "name",
            "must be 1 to 63 letters, digits, '.', '_' or '-', starting with a letter or digit",
        );
    }
    if let Some(names) = &request.deployments {
        if names.is_empty() {
            errors.push(
                "deployments",
                "must name at least one deployment; omit it for every deployment of the project",
            );
        }
        if names.len() > MAX_DEPLOYMENTS {
            errors.push(
                "deployments",
                format!("may name at most {MAX_DEPLOYMENTS} deployments"),
            );
        }
        for (i, name) in names.iter().enumerate() {
            if names[..i].contains(name) {
                errors.push(
                    format!("deployments[{i}]"),
                    format!("`{name}` is named twice"),
                );
            }
        }
    }
    if let Some(rate) = request.requests_per_minute
        && !(1..=MAX_REQUESTS_PER_MINUTE).contains(&rate)
    {
        errors.push(
            "requestsPerMinute",
            format!("must be from 1 to {MAX_REQUESTS_PER_MINUTE}; omit it for no limit"),
        );
    }
    if let Some(limit) = request.max_concurrent
        && !(1..=MAX_CONCURRENT).contains(&limit)
    {
        errors.push(
            "maxConcurrent",
            format!("must be from 1 to {MAX_CONCURRENT}; omit it for no limit"),
        );
    }
    if request.daily_token_budget.is_some_and(|b| b < 1) {
        errors.push(
            "dailyTokenBudget",
            "must be at least 1; omit it for no budget",
        );
    }
    if let Some(at) = request.expires_at {
        if at <= now {
            errors.push("expiresAt", "must be in the future");
        } else if at > now + Duration::days(MAX_LIFETIME_DAYS) {
            errors.push("expiresAt", "must be at most 10 years from now");
        }
    }
    errors
}

/// Creates a model key on a project (project admins).
#[instrument(skip(ctx, actor, request), fields(key = %request.name))]
pub async fn create_key(
    ctx: &Context,
    actor: &Actor,
    project: &str,
    request: CreateKey,
) -> Result<CreatedKey, ServiceError> {
    let project = authorize(ctx, actor, project, Role::Admin).await?;
    let mut errors = validate(&request, Utc::now());
    if let Some(names) = request.deployments.as_deref().filter(|n| !n.is_empty()) {
        let existing =
            store::model_keys::existing_deployments(&ctx.pool, project.id, names).await?;
        for (i, name) in names.iter().enumerate() {
            if !existing.contains(name) {
                errors.push(
                    format!("deployments[{i}]"),
                    format!("project `{}` has no deployment `{name}`", project.name),
                );
            }
        }
    }
    errors.finish(|| ())?;

    let secret = new_secret();
    let mut tx = ctx.pool.begin().await?;
    let key = store::model_keys::insert(
        &mut *tx,
        NewKey {
            id: Uuid::now_v7(),
            project_id: project.id,
            name: &request.name,
            prefix: &secret[..SHOWN],
            key_hash: &hash_secret(&secret),
            deployments: request.deployments.as_deref(),
            requests_per_minute: request.requests_per_minute,
            daily_token_budget: request.daily_token_budget,
            max_concurrent: request.max_concurrent,
            created_by: actor.name(),
            expires_at: request.expires_at,
        },
    )
    .await
    .map_err(|err| {
        if store::is_unique_violation(&err, "model_key_live_name_idx") {
            ServiceError::conflict(
                Some("name"),
                format!("a live model key named `{}` already exists", request.name),
            )
        } else {
            err.into()
        }
    })?;
    let scope = match &key.deployments {
        Some(names) => format!("deployments {}", names.join(", ")),
        None => "every deployment".to_owned(),
    };
    store::audit::insert_audit_event(
        &mut *tx,
        Some(project.id),
        "ModelKeyCreated",
        &format!("modelkey/{}", key.name),
        &format!(
            "model key `{}` ({}…) created for {scope}",
            key.name, key.prefix
        ),
        actor.name(),
    )
    .await?;
    tx.commit().await?;
    tracing::info!(key_id = %key.id, project = %project.name, "model key created");
    Ok(CreatedKey { key, secret })
}

/// The project's model keys, newest first, without their secrets (project admins).
#[instrument(skip(ctx, actor))]
pub async fn list_keys(
    ctx: &Context,
    actor: &Actor,
    project: &str,
    query: &ListKeys,
) -> Result<Page<ModelKey>, ServiceError> {
    let project = authorize(ctx, actor, project, Role::Admin).await?;
    let limit = page_size(query.limit)?;
    let live = query.live.unwrap_or(false);
    let filters = format!("modelkeys|{}|{live}", project.id);
    let before = match &query.cursor {
        Some(c) => Some(parse_uuid_cursor(&cursor::decode(c, &filters)?)?),
        None => None,
    };
    let rows = store::model_keys::list(&ctx.pool, project.id, live, before, limit + 1).await?;
    Ok(cursor::page(rows, limit, &filters, |k| k.id.to_string()))
}

/// One model key of the project (project admins).
#[instrument(skip(ctx, actor))]
pub async fn get_key(
    ctx: &Context,
    actor: &Actor,
    project: &str,
    id: Uuid,
) -> Result<ModelKey, ServiceError> {
    let project = authorize(ctx, actor, project, Role::Admin).await?;
    store::model_keys::get(&ctx.pool, project.id, id)
        .await?
        .ok_or_else(|| ServiceError::not_found("model key", id.to_string()))
}

/// Revokes a model key: every process's check refuses it within a second (the table's
/// trigger notifies their caches).
#[instrument(skip(ctx, actor))]
pub async fn revoke_key(
    ctx: &Context,
    actor: &Actor,
    project: &str,
    id: Uuid,
) -> Result<ModelKey, ServiceError> {
    let project = authorize(ctx, actor, project, Role::Admin).await?;
    let mut tx = ctx.pool.begin().await?;
    let key = store::model_keys::revoke(&mut *tx, project.id, id)
        .await?
        .ok_or_else(|| ServiceError::not_found("live model key", id.to_string()))?;
    store::audit::insert_audit_event(
        &mut *tx,
        Some(project.id),
        "ModelKeyRevoked",
        &format!("modelkey/{}", key.name),
        &format!("model key `{}` ({}…) revoked", key.name, key.prefix),
        actor.name(),
    )
    .await?;
    tx.commit().await?;
    tracing::info!(key_id = %key.id, "model key revoked");
    Ok(key)
}

/// The requests key `id` was let through, per UTC day over the last `days` days (1 to 366,
/// default 30; today included) (project admins).
#[instrument(skip(ctx, actor))]
pub async fn key_usage(
    ctx: &Context,
    actor: &Actor,
    project: &str,
    id: Uuid,
    days: Option<i64>,
) -> Result<KeyUsage, ServiceError> {
    let days = days.unwrap_or(30);
    if !(1..=366).contains(&days) {
        return Err(FieldErrors::single("days", "must be between 1 and 366").into());
    }
    let key = get_key(ctx, actor, project, id).await?;
    let to = Utc::now().date_naive();
    let from = to - Duration::days(days - 1);
    let since = from.and_time(chrono::NaiveTime::MIN).and_utc();
    let until = (to + Duration::days(1))
        .and_time(chrono::NaiveTime::MIN)
        .and_utc();
    let rows = store::model_keys::key_days(&ctx.pool, &[id], since, until).await?;
    Ok(usage_of(key, from, to, &rows))
}

/// Sums a key's rows per day (every day of the range) and per deployment.
fn usage_of(
    key: ModelKey,
    from: NaiveDate,
    to: NaiveDate,
    rows: &[store::model_keys::KeyDay],
) -> KeyUsage {
    let daily: Vec<KeyUsageDay> = from
        .iter_days()
        .take_while(|d| *d <= to)
        .map(|date| {
            let of_day = rows.iter().filter(|r| r.day == date);
            KeyUsageDay {
                date,
                requests: of_day.clone().map(|r| r.requests).sum(),
                tokens: of_day.map(|r| r.tokens).sum::<f64>().round() as i64,
            }
        })
        .collect();
    let mut deployments: Vec<KeyUsageDeployment> = Vec::new();
    for row in rows {
        let name = row.deployment.clone();
        match deployments.iter_mut().find(|d| d.deployment == name) {
            Some(d) => {
                d.requests += row.requests;
                d.tokens += row.tokens.round() as i64;
            }
            None => deployments.push(KeyUsageDeployment {
                deployment: name,
                requests: row.requests,
                tokens: row.tokens.round() as i64,
            }),
        }
    }
    deployments.sort_by_key(|d| std::cmp::Reverse(d.requests));
    KeyUsage {
        key_id: key.id,
        key: key.name,
        from,
        to,
        requests: daily.iter().map(|d| d.requests).sum(),
        tokens: daily.iter().map(|d| d.tokens).sum(),
        daily,
        deployments,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(errors: &FieldErrors) -> Vec<String> {
        errors.as_slice().iter().map(|e| e.field.clone()).collect()
    }

    #[test]
    fn every_wrong_field_is_named() {
        let now = Utc::now();
        let request = CreateKey {
            name: "-bad name".into(),
            deployments: Some(vec!["a".into(), "b".into(), "a".into()]),
            requests_per_minute: Some(0),
            daily_token_budget: Some(0),
            max_concurrent: Some(0),
            expires_at: Some(now - Duration::minutes(1)),
        };
        assert_eq!(
            fields(&validate(&request, now)),
            [
                "name",
                "deployments[2]",
                "requestsPerMinute",
                "maxConcurrent",
                "dailyTokenBudget",
                "expiresAt"
            ]
        );
        let empty = CreateKey {
            name: "ok".into(),
            deployments: Some(vec![]),
            expires_at: Some(now + Duration::days(MAX_LIFETIME_DAYS + 1)),
            ..CreateKey::default()
        };
        assert_eq!(fields(&validate(&empty, now)), ["deployments", "expiresAt"]);
        let fine = CreateKey {
            name: "app-1".into(),
            requests_per_minute: Some(600),
            ..CreateKey::default()
        };
        assert!(fields(&validate(&fine, now)).is_empty());
    }

    #[test]
    fn secrets_are_recognisable_and_distinct() {
        let (a, b) = (new_secret(), new_secret());
        assert!(a.starts_with(KEY_PREFIX) && b.starts_with(KEY_PREFIX));
        assert_ne!(a, b);
        assert_eq!(a.len(), KEY_PREFIX.len() + 43);
    }
}
