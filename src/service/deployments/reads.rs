//! Reading deployments: one, a page, by id; their revisions, timeline and counts.

use super::*;

#[instrument(skip(ctx, actor))]
pub async fn get_deployment(
    ctx: &Context,
    actor: &Actor,
    project: &str,
    name: &str,
) -> Result<Deployment, ServiceError> {
    let project = authorize(ctx, actor, project, Role::Viewer).await?;
    get_deployment_in(ctx, &project, name).await
}

/// [`get_deployment`] in a project already authorised.
pub async fn get_deployment_in(
    ctx: &Context,
    project: &Authorized,
    name: &str,
) -> Result<Deployment, ServiceError> {
    project.require(Role::Viewer)?;
    let read = find_read(ctx, project, name).await?;
    Ok(super::super::load::record(ctx, read, &project.name))
}

/// The deployment `name` with what is shown beside its status, in one (batched) read.
async fn find_read(
    ctx: &Context,
    project: &Project,
    name: &str,
) -> Result<DeploymentRead, ServiceError> {
    check_name_could_exist(name)?;
    let read = ctx.lookups.find(project.id, name).await?;
    read.ok_or_else(|| ServiceError::not_found("deployment", name))
}

async fn find(ctx: &Context, project: &Project, name: &str) -> Result<DeploymentRow, ServiceError> {
    Ok(find_read(ctx, project, name).await?.row)
}

#[instrument(skip(ctx, actor))]
pub async fn list_deployments(
    ctx: &Context,
    actor: &Actor,
    project: &str,
    query: &ListDeployments,
) -> Result<Page<Deployment>, ServiceError> {
    let project = authorize(ctx, actor, project, Role::Viewer).await?;
    list_deployments_in(ctx, &project, query).await
}

/// [`list_deployments`] in a project already authorised.
pub async fn list_deployments_in(
    ctx: &Context,
    project: &Authorized,
    query: &ListDeployments,
) -> Result<Page<Deployment>, ServiceError> {
    project.require(Role::Viewer)?;
    let mut errors = FieldErrors::new();
    let phase = match &query.phase {
        Some(p) => errors.check("phase", p.parse::<Phase>()),
        None => None,
    };
    let selector = match &query.label_selector {
        Some(s) => errors
            .check("labelSelector", LabelSelector::parse(s))
            .unwrap_or_default(),
        None => LabelSelector::default(),
    };
    if let Some(prefix) = &query.name_prefix {
        let ok = prefix.len() <= 45
            && prefix
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
        if !ok {
            errors.push(
                "namePrefix",
                "must be at most 45 lowercase letters, digits or '-'",
            );
        }
    }
    let limit = match page_size(query.limit) {
        Ok(limit) => limit,
        Err(ServiceError::Invalid(e)) => {
            errors.extend(e);
            0
        }
        Err(other) => return Err(other),
    };
    let filters = format!(
        "deployments|{}|{:?}|{:?}|{:?}",
        project.id, query.phase, query.label_selector, query.name_prefix
    );
    let after = match &query.cursor {
        Some(c) => match cursor::decode(c, &filters).and_then(|k| parse_uuid_cursor(&k)) {
            Ok(id) => Some(id),
            Err(e) => {
                errors.extend(e);
                None
            }
        },
        None => None,
    };
    errors.finish(|| ())?;

    let filter = DeploymentFilter {
        phase,
        selector,
        name_prefix: query.name_prefix.clone(),
        after,
        limit: limit + 1,
    };
    let mut conn = ctx.hot.acquire().await?;
    let rows = store::deployments::list_deployment_reads(&mut *conn, project.id, &filter).await?;
    conn.reuse();
    let page = cursor::page(rows, limit, &filters, |read| read.row.id.to_string());
    let items: Vec<Deployment> = page
        .items
        .into_iter()
        .map(|read| super::super::load::record(ctx, read, &project.name))
        .collect();
    Ok(Page {
        items,
        next_cursor: page.next_cursor,
        cursors: page.cursors,
    })
}

/// A deployment by its id, wherever it is, if the caller may read its project.
pub async fn get_deployment_by_id(
    ctx: &Context,
    actor: &Actor,
    id: Uuid,
) -> Result<(Authorized, Deployment), ServiceError> {
    let not_found = || ServiceError::not_found("deployment", id.to_string());
    let found = store::deployments::find_reconcile_target(&ctx.pool, id)
        .await?
        .ok_or_else(not_found)?;
    let row = found.row;
    // Another project's id reads as missing, as a name would.
    let project = authorize(ctx, actor, &found.project, Role::Viewer)
        .await
        .map_err(|_| not_found())?;
    let mut deployment = [row.into_record(&project.name)];
    super::super::load::attach(ctx, &mut deployment).await?;
    let [deployment] = deployment;
    Ok((project, deployment))
}

/// The newest `per` (at most 20) timeline entries of each deployment of an authorised
/// project, newest first, in one read (GraphQL pages of deployments batch through this).
pub async fn latest_events_in(
    ctx: &Context,
    project: &Authorized,
    deployment_ids: &[Uuid],
    per: i64,
) -> Result<std::collections::HashMap<Uuid, Vec<TimelineEvent>>, ServiceError> {
    project.require(Role::Viewer)?;
    if !(1..=20).contains(&per) {
        return Err(FieldErrors::single("count", "must be between 1 and 20").into());
    }
    let mut by_deployment: std::collections::HashMap<Uuid, Vec<TimelineEvent>> =
        std::collections::HashMap::new();
    for event in store::events::latest_events(&ctx.pool, project.id, deployment_ids, per).await? {
        by_deployment
            .entry(event.deployment_id)
            .or_default()
            .push(event);
    }
    Ok(by_deployment)
}

/// How many revisions each deployment of an authorised project has, in one read.
pub async fn revision_counts_in(
    ctx: &Context,
    project: &Authorized,
    deployment_ids: &[Uuid],
) -> Result<std::collections::HashMap<Uuid, i64>, ServiceError> {
    project.require(Role::Viewer)?;
    Ok(
        store::revisions::revision_counts(&ctx.pool, project.id, deployment_ids)
            .await?
            .into_iter()
            .collect(),
    )
}

/// How many deployments of the project are in each phase (phases with none are left out).
pub async fn phase_counts(
    ctx: &Context,
    project: &Authorized,
) -> Result<Vec<(Phase, i64)>, ServiceError> {
    project.require(Role::Viewer)?;
    let counts = store::deployments::phase_counts(&ctx.pool, project.id).await?;
    Ok(counts
        .into_iter()
        .filter_map(|(phase, n)| Some((phase.parse::<Phase>().ok()?, n)))
        .collect())
}

/// GPUs the project's deployments ask for (replicas × GPUs per pod) and hold in ready pods.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GpuUsage {
    pub requested: i64,
    pub in_use: i64,
}

pub async fn gpu_usage(ctx: &Context, project: &Authorized) -> Result<GpuUsage, ServiceError> {
    project.require(Role::Viewer)?;
    let mut usage = GpuUsage::default();
    for d in store::deployments::specs_of_project(&ctx.pool, project.id).await? {
        // A stored spec that does not resolve asks for nothing the worker would apply.
        let Ok(serving) = d.spec.serving(&d.name) else {
            continue;
        };
        match &serving.roles {
            None => {
                let per_pod = i64::from(serving.gpus);
                usage.requested += i64::from(serving.replicas) * per_pod;
                usage.in_use += d.status.replicas.ready * per_pod;
            }
            // Each role's pods ask for the role's GPUs.
            Some(roles) => {
                for role in ServingRole::ALL {
                    let r = roles.get(role);
                    let ready = d.status.roles.iter().find(|s| s.role == role.as_str());
                    let per_pod = i64::from(r.gpus);
                    usage.requested += i64::from(r.replicas) * per_pod;
                    usage.in_use += ready.map_or(0, |s| s.replicas.ready) * per_pod;
                }
            }
        }
        // A canary's pods take GPUs of their own.
        if let Some(canary) = &d.canary
            && let Ok(serving) = canary.spec.serving(&d.name)
        {
            let per_pod = i64::from(serving.gpus);
            usage.requested += i64::from(serving.replicas) * per_pod;
            if let Some(track) = &d.status.canary {
                usage.in_use += track.replicas.ready * per_pod;
            }
        }
    }
    Ok(usage)
}

#[instrument(skip(ctx, actor))]
pub async fn list_revisions(
    ctx: &Context,
    actor: &Actor,
    project: &str,
    name: &str,
    limit: Option<i64>,
    cursor_param: Option<&str>,
) -> Result<Page<Revision>, ServiceError> {
    let project = authorize(ctx, actor, project, Role::Viewer).await?;
    let row = find(ctx, &project, name).await?;
    list_revisions_in(ctx, &project, row.id, limit, cursor_param).await
}

/// The revisions of the deployment `deployment_id` of a project already authorised (none
/// when the id is another project's).
pub async fn list_revisions_in(
    ctx: &Context,
    project: &Authorized,
    deployment_id: Uuid,
    limit: Option<i64>,
    cursor_param: Option<&str>,
) -> Result<Page<Revision>, ServiceError> {
    project.require(Role::Viewer)?;
    let limit = page_size(limit)?;
    let filters = format!("revisions|{deployment_id}");
    let before = match cursor_param {
        Some(c) => Some(parse_i64_cursor(&cursor::decode(c, &filters)?)?),
        None => None,
    };
    let rows =
        store::revisions::list_revisions(&ctx.pool, project.id, deployment_id, before, limit + 1)
            .await?;
    Ok(cursor::page(rows, limit, &filters, |r| {
        r.revision.to_string()
    }))
}

/// The timeline of a deployment by id: it outlives the deployment.
#[instrument(skip(ctx, actor))]
pub async fn list_events(
    ctx: &Context,
    actor: &Actor,
    project: &str,
    deployment: DeploymentRef<'_>,
    limit: Option<i64>,
    cursor_param: Option<&str>,
) -> Result<Page<TimelineEvent>, ServiceError> {
    let project = authorize(ctx, actor, project, Role::Viewer).await?;
    let deployment_id = match deployment {
        DeploymentRef::Name(name) => find(ctx, &project, name).await?.id,
        DeploymentRef::Id(id) => id,
    };
    list_events_in(ctx, &project, deployment_id, limit, cursor_param).await
}

/// The timeline of the deployment `deployment_id` of a project already authorised (empty
/// when the id is another project's).
pub async fn list_events_in(
    ctx: &Context,
    project: &Authorized,
    deployment_id: Uuid,
    limit: Option<i64>,
    cursor_param: Option<&str>,
) -> Result<Page<TimelineEvent>, ServiceError> {
    project.require(Role::Viewer)?;
    let limit = page_size(limit)?;
    let filters = format!("events|{}|{deployment_id}", project.id);
    let after = match cursor_param {
        Some(c) => Some(parse_i64_cursor(&cursor::decode(c, &filters)?)?),
        None => None,
    };
    let rows =
        store::events::list_events(&ctx.pool, project.id, deployment_id, after, limit + 1).await?;
    Ok(cursor::page(rows, limit, &filters, |e| e.id.to_string()))
}
