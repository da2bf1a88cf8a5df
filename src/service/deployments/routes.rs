//! The route a deployment claims on its Gateway, checked on every spec change: the rules
//! that need no other row (`domain::routing`, with the reserved hostnames), then, under the
//! route-space lock, those that do (the SQL function `check_route_claim`, which creates run
//! too).

use super::*;

/// The hostnames a route on `route`'s Gateway may not claim: the platform's
/// (`MODELPLANE_RESERVED_HOSTNAMES`) and, always, those the Gateway itself answers for, as
/// the worker last saw it (its listeners' hostnames and its status's hostname addresses).
pub(super) async fn reserved_hostnames<'a>(
    ctx: &'a Context,
    route: &RouteClaim,
) -> Result<std::borrow::Cow<'a, [String]>, ServiceError> {
    if route.hostname.is_none() {
        return Ok(std::borrow::Cow::Borrowed(
            ctx.routing.reserved_hostnames.as_slice(),
        ));
    }
    let gateway = if route.gateway.is_empty() {
        match ctx
            .routing
            .default_gateway
            .as_deref()
            .map(crate::domain::parse_gateway_ref)
        {
            Some(Ok((namespace, name, _))) => format!("{namespace}/{name}"),
            _ => {
                return Ok(std::borrow::Cow::Borrowed(
                    ctx.routing.reserved_hostnames.as_slice(),
                ));
            }
        }
    } else {
        route.gateway.clone()
    };
    let mut reserved = ctx.routing.reserved_hostnames.clone();
    reserved.extend(store::gateways::hostnames_of_gateway(&ctx.pool, &gateway).await?);
    Ok(std::borrow::Cow::Owned(reserved))
}

pub(crate) fn route_claim(
    ctx: &Context,
    project: &Project,
    name: &str,
    spec: &DeploymentSpec,
) -> RouteClaim {
    RouteClaim::of(
        spec,
        &project.name,
        name,
        ctx.routing.default_gateway.as_deref(),
    )
}

/// Refuses a route that another project's or another deployment's route would collide
/// with on a shared Gateway (see `domain::routing`).
pub(super) async fn check_route(
    ctx: &Context,
    tx: &mut Transaction<'_, Postgres>,
    project: &Project,
    deployment_id: Uuid,
    spec: &DeploymentSpec,
    route: &RouteClaim,
) -> Result<(), ServiceError> {
    let reserved = reserved_hostnames(ctx, route).await?;
    check_shared_gateway_rules(spec, project, route, &reserved)?;
    lock_route_space(tx, project, route).await?;
    // The rules that need the other deployments live in SQL only, where creates run them too.
    match store::routes::check_route_claim(&mut **tx, project.id, deployment_id, route).await? {
        None => Ok(()),
        Some(RouteRefusal::HostnameTaken) => Err(hostname_conflict(
            route.hostname.as_deref().unwrap_or_default(),
        )),
        Some(RouteRefusal::Overlaps { name, path }) => Err(path_conflict(route, &name, &path)),
    }
}

/// Takes the part of the Gateways' request space a route lives in, so two concurrent
/// writers cannot both find it free (see [`RouteSpace`]).
pub(super) async fn lock_route_space(
    tx: &mut Transaction<'_, Postgres>,
    project: &Project,
    route: &RouteClaim,
) -> Result<(), sqlx::Error> {
    let space = RouteSpace::of(project.id, route);
    store::routes::lock_route_space(&mut **tx, &space.space, &space.paths).await
}

pub(super) fn hostname_conflict(host: &str) -> ServiceError {
    ServiceError::conflict(
        Some("spec.routing.hostname"),
        format!("hostname `{host}` is already used by another project"),
    )
}

pub(super) fn path_conflict(route: &RouteClaim, other: &str, path: &str) -> ServiceError {
    ServiceError::conflict(
        Some("spec.routing.pathPrefix"),
        format!(
            "path prefix `{}` overlaps `{path}` of deployment `{other}` on the same Gateway and hostname: \
             one would receive the other's requests",
            route.path_prefix
        ),
    )
}
