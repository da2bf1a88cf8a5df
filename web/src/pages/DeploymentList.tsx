// Placeholder: being built.
export function DeploymentList() {
  return <p>DeploymentList</p>;
}
