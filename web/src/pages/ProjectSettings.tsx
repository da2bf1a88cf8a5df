// Placeholder: being built.
export function ProjectSettings() {
  return <p>ProjectSettings</p>;
}
