output "public_ip" {
  description = "The bastion's public address: the way in to the cluster."
  value       = aws_instance.this.public_ip
}

output "private_ip" {
  description = "The bastion's private address."
  value       = aws_instance.this.private_ip
}

output "instance_id" {
  description = "The bastion's instance id."
  value       = aws_instance.this.id
}

output "security_group_id" {
  description = "The bastion's security group: the nodes allow SSH from it alone."
  value       = aws_security_group.this.id
}

output "login_user" {
  description = "The SSH user of the bastion's image: the first hop's login."
  value       = var.login_user
}
