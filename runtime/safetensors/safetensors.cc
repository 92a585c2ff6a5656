// Placeholder: implemented by issue 35.
