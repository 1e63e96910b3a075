"""pool"""
